"""Review engine: critic lenses, backends, parallel fan-out, synthesis, rounds and lessons mining."""
