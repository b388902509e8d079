"""Pure array math for the transformer forward, written once against an array module (numpy or cupy)."""
