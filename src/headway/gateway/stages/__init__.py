"""The stages of the request path, one module each; ``gateway/path.py`` runs them in order."""
