"""What the service keeps between requests: the served model slot and the feedback store."""
