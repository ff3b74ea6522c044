"""What differs between the model endpoints: each one's parse, its model checks, its answer."""
