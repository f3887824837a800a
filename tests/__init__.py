"""The test suite; its folders mirror the packages (models, training, evaluation, service, cli) plus e2e."""
