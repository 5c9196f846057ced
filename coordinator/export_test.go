package coordinator

// SetCatchUpHook makes cfg run f after each decision a session that holds
// leadership verifies while catching up (tests use it to make catching up
// outlast the leadership entry's TTL).
func SetCatchUpHook(cfg *Config, f func()) { cfg.caughtUp = f }
