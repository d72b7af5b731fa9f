"""Results data: the versioned schema, run directories, and readers for other tools' output."""
