"""Configuration: the one Settings (XTAG_* variables, .env) and the environment's other conventions, read here
only, by the CLI, the service and cluster/ alike; a floor above models/ and below everything that runs."""
