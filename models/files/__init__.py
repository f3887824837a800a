"""File safety every writer and loader shares: files written whole or not at all, index bounds and NaN/inf scans."""
