"""Chapter 7, prefix caching: requests that share a prompt prefix share its KV blocks."""
