"""The Batch API's HTTP side: files, batches, and the executor's line routes."""
