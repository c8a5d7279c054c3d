"""Temporal execution: shared names and inputs, the bundled workflow, activities, worker, client."""
