"""The exchange between nodes partitioned unlike each other: routing of results to connections."""
