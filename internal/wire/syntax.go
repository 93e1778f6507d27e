// Package wire is the HTTP syntax that the framing guard, the proxy and
// the rules all read bytes by: tokens, digits, optional whitespace,
// case-insensitive comparison (syntax.go), the form a Host is matched
// in (host.go) and the Via entries a loop is found by (via.go). It
// imports only the standard library, so that the guard, which screens
// bytes before anything else sees them, needs nothing of the rules.
package wire

// The byte-level syntax of HTTP shared by what checks it: config
// validation (methods and header names are tokens), the framing guard
// (request heads and chunked bodies) and client identity (X-Forwarded-For
// elements). Each function takes a string or a byte slice alike, so a
// caller holding raw bytes neither copies nor allocates to ask.

// IsToken reports whether s is an HTTP token: one or more tchar (RFC 9110
// §5.6.2).
func IsToken[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

// isTokenByte reports whether c is a tchar (RFC 9110 §5.6.2): a letter, a
// digit, or one of !#$%&'*+-.^_`|~.
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// IsDigit reports whether c is an ASCII decimal digit.
func IsDigit(c byte) bool { return '0' <= c && c <= '9' }

// IsHexDigit reports whether c is an ASCII hexadecimal digit, in either
// case.
func IsHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Unhex returns the value of the hexadecimal digit c, which must satisfy
// IsHexDigit (for any other byte the result is meaningless).
func Unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// TrimOWS removes optional whitespace (spaces and horizontal tabs, RFC 9110
// §5.6.3) from both ends of s. strings.TrimSpace would also remove other
// bytes, which no HTTP peer writes around a field value or list element.
func TrimOWS[T ~string | ~[]byte](s T) T {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// EqualFoldLower reports whether s equals lower, ignoring ASCII case; lower
// must be lower-case ASCII (a field name as a constant, say). Unlike
// strings.EqualFold it folds no other characters, as HTTP field names ask.
func EqualFoldLower[T ~string | ~[]byte](s T, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
