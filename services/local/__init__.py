"""Running llmbus services as child processes on this machine (`llmbus generate`, later `up`)."""
