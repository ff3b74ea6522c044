"""Per-tenant quotas: token buckets counted in texts, charged before the work runs."""
