package xsk

// LentCount returns how many chunks s has lent out.
func LentCount(s *Socket) int {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return s.lentCount
}
