package kvpool

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidNamespace is matched (with errors.Is) by every Namespace.Validate
// error.
var ErrInvalidNamespace = errors.New("kvpool: invalid namespace")

// keyVersion is the first two segments of every key. Bump the version when
// the key grammar or the value byte order changes, so old and new objects
// can never alias.
const keyVersion = "mc/v1/"

// Namespace pins everything that changes the bytes of a cached block: two
// instances share cached blocks exactly when their Namespaces are equal.
// Keys are Prefix() followed by the lower-case hex of the engine's chained
// block (page, chunk) hash.
type Namespace struct {
	// Model identifies the model (a name or a path, e.g.
	// "meta-llama/Llama-3.1-8B-Instruct"); required.
	Model string
	// DType is the KV-cache element type as the engine names it (e.g.
	// "bfloat16", "fp8_e4m3"); required.
	DType string
	// Layout names the value byte layout (e.g. "vllm-flash-attn-nhd",
	// "sglang-page_first"); required. Values here are gathered in the
	// canonical order (see Layout), so engines whose blocks gather to the
	// same bytes may share a Layout name.
	Layout string
	// TPRank and TPSize are this worker's tensor-parallel shard and the
	// number of shards; 0 <= TPRank < TPSize. Callers whose ranks hold
	// replicated heads (GQA with TP above the KV-head count) pass the shard
	// index (tp_rank / replication) as TPRank and the shard count as TPSize.
	TPRank, TPSize int
	// PPRank is this worker's pipeline stage, 0 <= PPRank < max(PPSize, 1).
	PPRank int
	// PPSize is the number of pipeline stages; 0 means 1. It is part of the
	// key because the layers a stage holds depend on it.
	PPSize int
	// SharedMLA marks KV that is identical on every TP rank (MLA): the
	// keys then carry "mla" instead of the TP rank and size, so all ranks
	// read (and one rank writes) the same objects.
	SharedMLA bool
	// BlockTokens is the block (page, chunk) size in tokens; > 0.
	BlockTokens int
	// Tenant is an optional tenant id or cache salt; empty for none.
	Tenant string
}

// Validate reports the first problem with n, as an error matching
// ErrInvalidNamespace that names the field.
func (n Namespace) Validate() error {
	switch {
	case n.Model == "":
		return fmt.Errorf("%w: empty Model", ErrInvalidNamespace)
	case n.DType == "":
		return fmt.Errorf("%w: empty DType (model %q)", ErrInvalidNamespace, n.Model)
	case n.Layout == "":
		return fmt.Errorf("%w: empty Layout (model %q)", ErrInvalidNamespace, n.Model)
	case n.TPSize < 1:
		return fmt.Errorf("%w: TPSize %d, want >= 1", ErrInvalidNamespace, n.TPSize)
	case n.TPRank < 0 || n.TPRank >= n.TPSize:
		return fmt.Errorf("%w: TPRank %d outside [0, TPSize=%d)", ErrInvalidNamespace, n.TPRank, n.TPSize)
	case n.PPSize < 0:
		return fmt.Errorf("%w: PPSize %d, want >= 0 (0 means 1)", ErrInvalidNamespace, n.PPSize)
	case n.PPRank < 0 || n.PPRank >= max(n.PPSize, 1):
		return fmt.Errorf("%w: PPRank %d outside [0, PPSize=%d)", ErrInvalidNamespace, n.PPRank, max(n.PPSize, 1))
	case n.BlockTokens < 1:
		return fmt.Errorf("%w: BlockTokens %d, want >= 1", ErrInvalidNamespace, n.BlockTokens)
	}
	return nil
}

// Prefix returns the key prefix of n:
//
//	mc/v1/<model>/<dtype>/<layout>/<shard>/pp<r>of<s>/bt<n>/[t=<tenant>/]
//
// where <shard> is "tp<rank>of<size>", or "mla" when SharedMLA is set, and
// every string field is escaped (see escape) so that the mapping from
// Namespace to prefix is one-to-one and a field can never inject a
// separator. Prefix does not validate n; call Validate once when the
// namespace is configured.
func (n Namespace) Prefix() string {
	var b strings.Builder
	b.Grow(len(keyVersion) + len(n.Model) + len(n.DType) + len(n.Layout) + len(n.Tenant) + 48)
	b.WriteString(keyVersion)
	escape(&b, n.Model)
	b.WriteByte('/')
	escape(&b, n.DType)
	b.WriteByte('/')
	escape(&b, n.Layout)
	b.WriteByte('/')
	if n.SharedMLA {
		b.WriteString("mla")
	} else {
		b.WriteString("tp")
		b.WriteString(strconv.Itoa(n.TPRank))
		b.WriteString("of")
		b.WriteString(strconv.Itoa(n.TPSize))
	}
	b.WriteString("/pp")
	b.WriteString(strconv.Itoa(n.PPRank))
	b.WriteString("of")
	b.WriteString(strconv.Itoa(max(n.PPSize, 1)))
	b.WriteString("/bt")
	b.WriteString(strconv.Itoa(n.BlockTokens))
	b.WriteByte('/')
	if n.Tenant != "" {
		b.WriteString("t=")
		escape(&b, n.Tenant)
		b.WriteByte('/')
	}
	return b.String()
}

// Key returns the key of the block whose chained hash is hash: Prefix()
// followed by the lower-case hex of hash. An empty hash panics (a
// programmer error: every block has a hash).
func (n Namespace) Key(hash []byte) string {
	return keyOf(n.Prefix(), hash)
}

// KeyUint64 returns the key of a block whose hash is a 64-bit integer (as
// vLLM's int block hashes and LMCache's 64-bit hashes are): the hash is
// written as 16 hex digits, so KeyUint64(h) equals Key of h's 8-byte
// big-endian encoding. A signed hash converts with uint64(h).
func (n Namespace) KeyUint64(hash uint64) string {
	p := n.Prefix()
	var b strings.Builder
	b.Grow(len(p) + 16)
	b.WriteString(p)
	for shift := 60; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(hash>>uint(shift))&0xf])
	}
	return b.String()
}

// LayerKey returns the key of one layer of a block, for layer-wise
// transfer: Key(hash) followed by "/l<layer>". Its value is what
// Layout.GatherLayer produces. An empty hash or a negative layer panics.
func (n Namespace) LayerKey(hash []byte, layer int) string {
	if layer < 0 {
		panic(fmt.Sprintf("kvpool: LayerKey with negative layer %d", layer))
	}
	l := strconv.Itoa(layer)
	return keyOf(n.Prefix(), hash, "/l", l)
}

// IDKey returns the key of an object whose engine-side id is a string
// (SGLang's page hashes are hex strings it hands over as opaque text):
// Prefix() followed by id, escaped as the string fields are (so a
// lower-case hex id is written as is and no id can inject a separator),
// then suffix verbatim (e.g. "/k"). An empty id panics (a programmer
// error: every page has an id).
func (n Namespace) IDKey(id string, suffix string) string {
	return PrefixedIDKey(n.Prefix(), id, suffix)
}

// PrefixedIDKey is Namespace.IDKey with the namespace's Prefix() computed
// once by the caller (for a batch of keys of one namespace).
func PrefixedIDKey(prefix, id, suffix string) string {
	if id == "" {
		panic("kvpool: key of an empty object id")
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(id) + len(suffix))
	b.WriteString(prefix)
	escape(&b, id)
	b.WriteString(suffix)
	return b.String()
}

// Keys returns Key(h) for each of hashes, computing the prefix once.
func (n Namespace) Keys(hashes [][]byte) []string {
	p := n.Prefix()
	keys := make([]string, len(hashes))
	for i, h := range hashes {
		keys[i] = keyOf(p, h)
	}
	return keys
}

const hexDigits = "0123456789abcdef"

// keyOf is prefix, the lower-case hex of hash, then suffix, in one
// allocation.
func keyOf(prefix string, hash []byte, suffix ...string) string {
	if len(hash) == 0 {
		panic("kvpool: key of an empty block hash")
	}
	size := len(prefix) + 2*len(hash)
	for _, s := range suffix {
		size += len(s)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(prefix)
	for _, c := range hash {
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	for _, s := range suffix {
		b.WriteString(s)
	}
	return b.String()
}

// escape writes s to b with every byte outside the RFC 3986 unreserved set
// (A-Z a-z 0-9 - . _ ~) written as %XX (upper-case hex). So '/', '%',
// '@', spaces and non-ASCII bytes never appear raw in a key segment, and
// distinct strings stay distinct.
func escape(b *strings.Builder, s string) {
	const digits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&0xf])
	}
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
