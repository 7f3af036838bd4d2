"""Human review before promotion: append-only verdicts and exploit fixtures (`reviews`), and the
promotion gate, its bundle and its audit trail (`gate`)."""
