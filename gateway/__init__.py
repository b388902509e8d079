"""The HTTP gateway: the OpenAI, Anthropic and Ollama APIs over the bus (`llmbus run gateway`)."""
