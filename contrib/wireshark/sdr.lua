-- Wireshark dissector for SDR (software-defined reliability over RoCEv2).
--
-- Wireshark's InfiniBand dissector decodes RoCEv2 (BTH, RETH, ImmDt on UDP
-- 4791); this adds what SDR puts in them:
--
--   * data packets (WRITE or SEND with immediate): the immediate's message
--     number, packet offset and nibble (docs/DESIGN.md §3), and the chunk
--     the packet lands in (sdr.msg, sdr.offset, sdr.nibble, sdr.chunk);
--   * the reliability layer's control datagrams, carried as UD SEND
--     payloads that start with "SR" (package reliability/control): their
--     type and every field (sdr.ctrl.type == "nack", sdr.ctrl.transfer,
--     sdr.ctrl.ack.cumulative, sdr.ctrl.nack.first, ...).
--
-- Load it for one run with
--     tshark -X lua_script:contrib/wireshark/sdr.lua -r capture.pcap
-- or copy it into Wireshark's personal plugins folder
-- (~/.local/lib/wireshark/plugins/). Preferences (Edit > Preferences >
-- Protocols > SDR, or tshark -o sdr.mtu:4096): the immediate layout, the
-- path MTU and the chunk size, which the capture cannot tell for data
-- packets. The chunk size is learnt from the CTS datagrams when the
-- preference is 0 (the default).

local sdr = Proto("sdr", "SDR (software-defined reliability)")

sdr.prefs.layout = Pref.string("Immediate layout", "10/18/4",
	"Bits of the message number, packet offset and nibble in a data packet's immediate (QP attribute ImmLayout)")
sdr.prefs.mtu = Pref.uint("Path MTU", 1024, "Payload bytes of a full data packet")
sdr.prefs.chunk_size = Pref.uint("Chunk size", 0,
	"Bytes per chunk of the bitmap; 0: the chunk size of the last CTS seen, else 64 MTUs")

local ctrl_types = {
	[1] = "cts", [2] = "ack", [3] = "nack", [4] = "probe", [5] = "abort",
	[6] = "ping", [7] = "pong", [8] = "close", [9] = "fin", [10] = "pnack",
}
local schemes = { [1] = "sr-rto", [2] = "sr-nack", [3] = "ec", [4] = "hybrid", [5] = "auto" }
local codes = { [0] = "none", [1] = "mds", [2] = "xor" }
local abort_reasons = { [1] = "peer timed out", [2] = "length mismatch", [3] = "closed" }

local f = sdr.fields
f.msg = ProtoField.uint32("sdr.msg", "Message number")
f.offset = ProtoField.uint32("sdr.offset", "Packet offset")
f.nibble = ProtoField.uint8("sdr.nibble", "Immediate nibble", base.HEX)
f.nibble_index = ProtoField.uint8("sdr.nibble_index", "Nibble index")
f.chunk = ProtoField.uint32("sdr.chunk", "Chunk")

f.ctrl_type = ProtoField.string("sdr.ctrl.type", "Control type")
f.ctrl_type_code = ProtoField.uint8("sdr.ctrl.type_code", "Control type code")
f.ctrl_version = ProtoField.uint8("sdr.ctrl.version", "Version")
f.ctrl_transfer = ProtoField.uint64("sdr.ctrl.transfer", "Transfer")
f.cts_length = ProtoField.uint64("sdr.ctrl.cts.length", "Length")
f.cts_scheme = ProtoField.uint8("sdr.ctrl.cts.scheme", "Scheme", base.DEC, schemes)
f.cts_k = ProtoField.uint8("sdr.ctrl.cts.k", "Data chunks per submessage (k)")
f.cts_m = ProtoField.uint8("sdr.ctrl.cts.m", "Parity chunks per submessage (m)")
f.cts_code = ProtoField.uint8("sdr.ctrl.cts.code", "Code", base.DEC, codes, 0x03)
f.cts_chunk = ProtoField.uint32("sdr.ctrl.cts.chunk_size", "Chunk size")
f.ack_complete = ProtoField.bool("sdr.ctrl.ack.complete", "Complete", 8, nil, 0x01)
f.ack_imm_missing = ProtoField.bool("sdr.ctrl.ack.imm_missing", "Immediate missing", 8, nil, 0x02)
f.ack_words = ProtoField.uint16("sdr.ctrl.ack.words", "Bitmap words")
f.ack_cumulative = ProtoField.uint32("sdr.ctrl.ack.cumulative", "Cumulative (chunks below held)")
f.ack_base = ProtoField.uint32("sdr.ctrl.ack.base", "Bitmap base chunk")
f.ack_word = ProtoField.uint64("sdr.ctrl.ack.word", "Bitmap word", base.HEX)
f.ack_held = ProtoField.uint32("sdr.ctrl.ack.held", "Chunks held in the bitmap")
f.nack_ranges = ProtoField.uint16("sdr.ctrl.nack.ranges", "Ranges")
f.nack_first = ProtoField.uint32("sdr.ctrl.nack.first", "First chunk")
f.nack_count = ProtoField.uint32("sdr.ctrl.nack.count", "Chunks")
f.pnack_entries = ProtoField.uint16("sdr.ctrl.pnack.entries", "Entries")
f.pnack_chunk = ProtoField.uint32("sdr.ctrl.pnack.chunk", "Chunk")
f.pnack_mask = ProtoField.uint64("sdr.ctrl.pnack.mask", "Packet mask", base.HEX)
f.probe_from = ProtoField.uint32("sdr.ctrl.probe.from", "From chunk")
f.abort_reason = ProtoField.uint8("sdr.ctrl.abort.reason", "Reason", base.DEC, abort_reasons)

local ef_malformed = ProtoExpert.new("sdr.ctrl.malformed", "Malformed SDR control datagram",
	expert.group.MALFORMED, expert.severity.ERROR)
sdr.experts = { ef_malformed }

local ib_opcode = Field.new("infiniband.bth.opcode")
local ib_immdt = Field.new("infiniband.immdt")

-- Opcodes that carry an immediate (IBA 9.2): RC and UC SEND LAST/ONLY with
-- immediate and RDMA WRITE LAST/ONLY with immediate. SDR's data packets
-- are UC (or RC) WRITE ONLY with immediate.
local with_imm = {
	[0x03] = true, [0x05] = true, [0x09] = true, [0x0B] = true,
	[0x23] = true, [0x25] = true, [0x29] = true, [0x2B] = true,
}

-- parse_layout returns the bit widths of "a/b/c", or the default.
local function parse_layout(s)
	local a, b, c = string.match(s or "", "^(%d+)/(%d+)/(%d+)$")
	a, b, c = tonumber(a), tonumber(b), tonumber(c)
	if not a or a + b + c ~= 32 or a == 0 or b == 0 or c == 0 or 32 % c ~= 0 then
		return 10, 18, 4
	end
	return a, b, c
end

-- learnt_chunk is the chunk size of the last CTS dissected (first pass).
local learnt_chunk = 0

function sdr.init()
	learnt_chunk = 0
end

local function chunk_size()
	if sdr.prefs.chunk_size > 0 then
		return sdr.prefs.chunk_size
	end
	if learnt_chunk > 0 then
		return learnt_chunk
	end
	return 64 * sdr.prefs.mtu
end

-- The data packets' fields, read from the InfiniBand dissector's.
function sdr.dissector(tvb, pinfo, tree)
	local op = ib_opcode()
	local imm = ib_immdt()
	if not op or not imm or not with_imm[op.value] then
		return
	end
	local r = imm.range
	if r:len() < 4 then
		return
	end
	local value = r:range(0, 4):uint()
	local msg_bits, off_bits, nib_bits = parse_layout(sdr.prefs.layout)
	local msg = bit32.rshift(value, off_bits + nib_bits)
	local offset = bit32.band(bit32.rshift(value, nib_bits), bit32.lshift(1, off_bits) - 1)
	local nibble = bit32.band(value, bit32.lshift(1, nib_bits) - 1)
	local nibbles = 32 / nib_bits
	local per_chunk = math.max(1, math.floor(chunk_size() / math.max(1, sdr.prefs.mtu)))
	local chunk = math.floor(offset / per_chunk)
	local t = tree:add(sdr, r:range(0, 4), string.format("SDR data: message %d, packet %d, chunk %d", msg, offset, chunk))
	t:add(f.msg, r:range(0, 4), msg)
	t:add(f.offset, r:range(0, 4), offset)
	t:add(f.chunk, r:range(0, 4), chunk)
	t:add(f.nibble, r:range(0, 4), nibble)
	t:add(f.nibble_index, r:range(0, 4), offset % nibbles)
	pinfo.cols.info:append(string.format(" [SDR msg=%d off=%d chunk=%d]", msg, offset, chunk))
end
register_postdissector(sdr)

-- dissect_control decodes a control datagram in tvb; it reports false
-- (leaving the payload to others) unless tvb starts with the magic, the
-- version and a known type.
local function dissect_control(tvb, pinfo, tree)
	if tvb:len() < 12 or tvb:range(0, 2):string() ~= "SR" or tvb:range(2, 1):uint() ~= 1 then
		return false
	end
	local code = tvb:range(3, 1):uint()
	local name = ctrl_types[code]
	if not name then
		return false
	end
	local t = tree:add(sdr, tvb(), "SDR control: " .. string.upper(name))
	t:add(f.ctrl_type, tvb:range(3, 1), name)
	t:add(f.ctrl_type_code, tvb:range(3, 1))
	t:add(f.ctrl_version, tvb:range(2, 1))
	t:add(f.ctrl_transfer, tvb:range(4, 8))
	local body = tvb:len() - 12
	local function malformed()
		t:add_proto_expert_info(ef_malformed)
		return true
	end
	-- fits reports whether the body holds want bytes: the payload the
	-- InfiniBand dissector hands over keeps the BTH's 0..3 pad bytes.
	local function fits(want)
		return body >= want and body - want < 4
	end
	local info = string.upper(name) .. " transfer=" .. tvb:range(4, 8):uint64():tonumber()
	if name == "cts" then
		if not fits(16) then return malformed() end
		learnt_chunk = tvb:range(24, 4):uint()
		t:add(f.cts_length, tvb:range(12, 8))
		t:add(f.cts_scheme, tvb:range(20, 1))
		t:add(f.cts_k, tvb:range(21, 1))
		t:add(f.cts_m, tvb:range(22, 1))
		t:add(f.cts_code, tvb:range(23, 1))
		t:add(f.cts_chunk, tvb:range(24, 4))
		info = info .. " scheme=" .. (schemes[tvb:range(20, 1):uint()] or "?")
	elseif name == "ack" then
		if body < 12 then return malformed() end
		local words = tvb:range(14, 2):uint()
		if not fits(12 + 8 * words) then return malformed() end
		t:add(f.ack_complete, tvb:range(12, 1))
		t:add(f.ack_imm_missing, tvb:range(12, 1))
		t:add(f.ack_words, tvb:range(14, 2))
		t:add(f.ack_cumulative, tvb:range(16, 4))
		t:add(f.ack_base, tvb:range(20, 4))
		local held = 0
		for i = 0, words - 1 do
			local w = tvb:range(24 + 8 * i, 8)
			t:add(f.ack_word, w)
			for half = 0, 1 do
				local v = w:range(4 * half, 4):uint()
				while v ~= 0 do
					v = bit32.band(v, v - 1)
					held = held + 1
				end
			end
		end
		t:add(f.ack_held, tvb:range(24, 8 * words), held)
		info = info .. " cumulative=" .. tvb:range(16, 4):uint()
		if bit32.band(tvb:range(12, 1):uint(), 1) ~= 0 then
			info = info .. " complete"
		end
	elseif name == "nack" or name == "pnack" then
		if body < 2 then return malformed() end
		local n = tvb:range(12, 2):uint()
		local size = name == "nack" and 8 or 12
		if not fits(2 + size * n) then return malformed() end
		if name == "nack" then
			t:add(f.nack_ranges, tvb:range(12, 2))
			for i = 0, n - 1 do
				t:add(f.nack_first, tvb:range(14 + 8 * i, 4))
				t:add(f.nack_count, tvb:range(18 + 8 * i, 4))
			end
			info = info .. " ranges=" .. n
		else
			t:add(f.pnack_entries, tvb:range(12, 2))
			for i = 0, n - 1 do
				t:add(f.pnack_chunk, tvb:range(14 + 12 * i, 4))
				t:add(f.pnack_mask, tvb:range(18 + 12 * i, 8))
			end
			info = info .. " entries=" .. n
		end
	elseif name == "probe" then
		if not fits(4) then return malformed() end
		t:add(f.probe_from, tvb:range(12, 4))
		info = info .. " from=" .. tvb:range(12, 4):uint()
	elseif name == "abort" then
		if not fits(1) then return malformed() end
		t:add(f.abort_reason, tvb:range(12, 1))
	elseif not fits(0) then
		return malformed()
	end
	pinfo.cols.protocol = "SDR"
	pinfo.cols.info = info
	return true
end

sdr:register_heuristic("infiniband.payload", dissect_control)
