"""Quotaweb: share a fleet of GPU instances between teams (the Django shell around
`scheduler`)."""
