"""The shell around the engine: snapshot in, decisions applied, events out."""
