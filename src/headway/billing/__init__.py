"""The consumer's side of billing: usage events → the ledger, exactly once; prices, invoices."""
