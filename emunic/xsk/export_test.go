package xsk

// LentCount returns how many chunks s has lent out.
func LentCount(s *Socket) int { return s.lentOut() }
