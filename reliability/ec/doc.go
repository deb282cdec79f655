// Package ec holds the erasure codes of SDR's EC reliability scheme: how a
// message maps onto data and parity chunks, and the MDS (Reed–Solomon) and
// XOR codes that fill and consume the parity.
//
// # Layout
//
// A message of dataLen bytes is cut into D = ceil(dataLen/ChunkSize) data
// chunks, the units the SDK's receive bitmap tracks; the last one may be
// short. Consecutive runs of K data chunks form L = ceil(D/K) submessages,
// and each submessage gets M parity chunks. The last submessage may hold
// k' < K data chunks: it is a shortened code whose missing data chunks are
// virtual zeros, never sent. A short last chunk is coded as if zero-padded to
// ChunkSize; its padding is never sent or written either.
//
// Parity lives in its own area of L*M*ChunkSize bytes, parity chunk j of
// submessage s at parity-area chunk s*M+j, rather than interleaved with the
// data. That keeps the data buffer exactly the application's message, so the
// data chunks are sent and received zero-copy at the offsets a plain SDR
// transfer uses, and repair by Selective Repeat names the same chunks; the
// receiver posts the parity area as a second buffer with its own bitmap.
//
// # Codes
//
// MDS is Reed–Solomon over GF(2^8) through github.com/klauspost/reedsolomon:
// any k' of a submessage's k'+M chunks rebuild it (K+M <= 256). The last,
// shortened submessage is coded with its own (k', M) code instead of feeding
// K-k' zero chunks through the full one; both sides use this package, and
// the decodability rule is the same. The encoders use the library's default
// systematic matrix and one goroutine each. Its Leopard GF(2^8) variant was
// measured too: on an AVX-512/GFNI AMD EPYC it encodes (32,8) about 2.5x faster,
// but rebuilds a submessage that lost one or two chunks 3–12x slower (its
// decode cost does not shrink with the loss), and it needs chunk sizes that
// are multiples of 64 bytes; the receiver decodes every lossy submessage,
// so the classic construction is used.
//
// XOR is the cheap code: parity i of a submessage is the XOR of its data
// chunks j with j mod M == i (M <= K). Each of the M parity groups survives
// the loss of one of its chunks.
//
// # Costs
//
// Encoding reads every data byte once and writes M/K parity bytes per data
// byte; MDS costs one GF(2^8) multiply-add per data byte and parity chunk
// (SIMD, GFNI where the CPU has it), XOR about (K/M-1)/(K/M) XORs per data
// byte. Decoding touches only submessages with missing data chunks and
// writes only those chunks. A Coder runs on the calling goroutine only; to
// use more cores, give each goroutine its own Coder and its own submessages
// (EncodeSubmessage, Reconstruct). XOR coding allocates nothing. MDS coding
// allocates nothing of its own: shards are views of the caller's buffers
// (only a short last chunk goes through one reused padded chunk); what
// remains are the reedsolomon library's internals, 1–2 small objects per
// submessage Encode and about 7 per ReconstructData (index slices), never a
// chunk buffer.
package ec
