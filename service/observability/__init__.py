"""What the service shows about itself: Prometheus metrics, logs, label drift and the last-hour timeline."""
