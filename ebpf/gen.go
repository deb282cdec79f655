package ebpf

// Regenerate with `go generate ./ebpf` (needs clang-14 and libbpf-dev from
// Debian). The output is committed and CI checks it is reproduced exactly.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -Wall -Werror" -target bpfel -go-package ebpf steer steer.c -- -I/usr/include/x86_64-linux-gnu
