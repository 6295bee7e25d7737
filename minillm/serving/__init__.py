"""Chapter 8, serving: an OpenAI-compatible HTTP server over the engine."""
