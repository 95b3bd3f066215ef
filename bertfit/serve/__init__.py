"""`bertfit serve`: TF Serving's REST API over a trained classifier, with dynamic batching."""
