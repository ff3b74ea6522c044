"""The Batch API's HTTP side: files and batches (the executor's line routes are the data
plane's, ``gateway/lines/``)."""
