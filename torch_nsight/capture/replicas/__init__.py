"""A sweep's replicas: one of each group of identical siblings profiled, its rows copied
to the others, and what a module launches as the sibling check compares it."""
