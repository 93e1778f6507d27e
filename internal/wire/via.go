package wire

// The Via field (RFC 9110 §7.6.3), as edge reads it to find a request it
// forwarded coming back to it:
//
//	Via = #( received-protocol RWS received-by [ RWS comment ] )
//
// What matters is only whether some entry was received by a given
// pseudonym, and a mistake one way costs far more than the other: an
// entry missed lets a loop go on (each pass adds an entry, until the head
// outgrows max_header_bytes), an entry seen where there is none answers
// 508 to a request that names the pseudonym itself. So the value is cut
// at every comma, in a comment or not: no comment, quote or escape a
// sender writes can hide the entries after it, and a comment's comma
// only makes one more piece to look at.

// ViaReceivedBy reports whether the Via field value v has an entry
// received by pseudonym: a comma-separated piece that is, after optional
// whitespace, a received-protocol (any bytes but space and tab), white
// space, and then exactly pseudonym, ended by white space, a comma or
// the end of v (so "1.1 name:8080" is not received by "name"). No entry
// is received by "". The scan takes time linear in len(v) and allocates
// nothing.
func ViaReceivedBy[T ~string | ~[]byte](v T, pseudonym string) bool {
	if pseudonym == "" {
		return false
	}
	for i := 0; i < len(v); {
		// One piece: v[i:end].
		end := i
		for end < len(v) && v[end] != ',' {
			end++
		}
		j := i
		for j < end && (v[j] == ' ' || v[j] == '\t') {
			j++
		}
		proto := j
		for j < end && v[j] != ' ' && v[j] != '\t' {
			j++
		}
		ws := j
		for j < end && (v[j] == ' ' || v[j] == '\t') {
			j++
		}
		if ws > proto && j > ws && end-j >= len(pseudonym) && string(v[j:j+len(pseudonym)]) == pseudonym {
			if k := j + len(pseudonym); k == end || v[k] == ' ' || v[k] == '\t' {
				return true
			}
		}
		i = end + 1
	}
	return false
}

// Pseudonym returns s made a Via pseudonym, a token (RFC 9110 §7.6.3):
// every byte of s that is not a tchar becomes '-'. It returns "" for "".
func Pseudonym(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isTokenByte(c) {
			b[i] = '-'
		}
	}
	return string(b)
}
