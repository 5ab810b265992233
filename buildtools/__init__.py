"""Build-time helpers (fetching registry packages, converting weights). Not shipped to the browser."""
