"""The services of llmbus, one package each, and the `llmbus` command that runs them."""
