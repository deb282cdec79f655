package xsk

// LentCount returns how many chunks s has lent out.
func LentCount(s *Socket) int { return s.lentOut() }

// UMEMMapped reports whether s's UMEM is still mapped (Close leaves it
// mapped while chunks are lent). Only after Close has returned.
func UMEMMapped(s *Socket) bool { return s.umem != nil }
