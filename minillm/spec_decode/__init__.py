"""Chapter 9, speculative decoding: propose tokens cheaply, verify them in one forward."""
