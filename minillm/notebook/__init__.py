"""What the chapters use to show things: the engine's own source, and the widgets."""
