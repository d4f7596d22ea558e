package cache

// sessionKeyExtras lists session keys added after the first layout, so
// TestLayoutCoversBuilders sees every field of SessionKeys.
func sessionKeyExtras(s SessionKeys) []string { return nil }
