package ja4

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The tables below give each case's ja4_r derived by hand from the
// hello's fields, as the comment above the case lists them, and its ja4
// from that ja4_r (checkWant recomputes the hashes from the raw lists, so
// the two columns cannot disagree). Neither comes from this package.

// Lists the recorded hellos share.
const (
	// OpenSSL 3.0.19's cipher suites (curl, openssl s_client), sorted.
	opensslCiphers = "002f,0033,0035,0039,003c,003d,0067,006b,009c,009d,009e,009f,00ff,1301,1302,1303,c009,c00a,c013,c014,c023,c024,c027,c028,c02b,c02c,c02f,c030,cca8,cca9,ccaa"
	// OpenSSL 3.0.19's signature_algorithms, in the order sent.
	opensslSigs = "0403,0503,0603,0807,0808,0809,080a,080b,0804,0805,0806,0401,0501,0601,0303,0301,0302,0402,0502,0602"
	// Go 1.26's cipher suites, sorted.
	goCiphers = "1301,1302,1303,c009,c00a,c013,c014,c02b,c02c,c02f,c030,cca8,cca9"
	// Go 1.26's signature_algorithms, in the order sent.
	goSigs = "0804,0403,0807,0805,0806,0401,0501,0601,0503,0603"
)

// TestRecordedHellos feeds the ClientHellos that TestRecord recorded from
// real clients to a real tls.Server and compares the fingerprint of what
// it reports with the fingerprint derived by hand from the recorded bytes.
func TestRecordedHellos(t *testing.T) {
	tests := []struct {
		file    string
		raw, fp string
	}{
		// curl 7.88.1 (OpenSSL 3.0.19), curl -sk https://127.0.0.1:PORT/
		// legacy_version 0303; supported_versions 0304,0303,0302,0301 → 13
		// SNI: none (curl sends none for an IP address) → i
		// ciphers (31): 1302,1303,1301,c02c,c030,009f,cca9,cca8,ccaa,c02b,c02f,009e,c024,c028,006b,c023,
		//   c027,0067,c00a,c014,0039,c009,c013,0033,009d,009c,003d,003c,0035,002f,00ff
		// extensions (11): 000b,000a,0010,0016,0017,0031,000d,002b,002d,0033,0015
		// ALPN: h2,http/1.1 → h2
		// signature_algorithms: opensslSigs
		// (c's hash is that of the "Python" t13d4312h1_c7886603b240_b26ce05bbdd6, another
		// OpenSSL 3 client with ALPN and padding, in FoxIO's ja4plus-mapping.csv, https://github.com/FoxIO-LLC/ja4/blob/main/ja4plus-mapping.csv.)
		{"curl",
			"t13i3111h2_" + opensslCiphers + "_000a,000b,000d,0015,0016,0017,002b,002d,0031,0033_" + opensslSigs,
			"t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"},
		// openssl s_client -connect 127.0.0.1:PORT -servername example.com (OpenSSL 3.0.19)
		// legacy_version 0303; supported_versions 0304,0303,0302,0301 → 13
		// SNI: example.com → d
		// ciphers (31): as curl's
		// extensions (10): 0000,000b,000a,0023,0016,0017,000d,002b,002d,0033
		// ALPN: none → 00
		// signature_algorithms: opensslSigs
		{"openssl",
			"t13d311000_" + opensslCiphers + "_000a,000b,000d,0016,0017,0023,002b,002d,0033_" + opensslSigs,
			"t13d311000_e8f1e7e78f70_1f22a2ca17c4"},
		// openssl s_client -connect 127.0.0.1:PORT -noservername
		// legacy_version 0303; supported_versions 0304,0303,0302,0301 → 13
		// SNI: none → i
		// ciphers (31): as curl's
		// extensions (9): 000b,000a,0023,0016,0017,000d,002b,002d,0033
		// ALPN: none → 00
		// signature_algorithms: opensslSigs
		{"openssl-nosni",
			"t13i310900_" + opensslCiphers + "_000a,000b,000d,0016,0017,0023,002b,002d,0033_" + opensslSigs,
			"t13i310900_e8f1e7e78f70_1f22a2ca17c4"},
		// Python 3.11.7's ssl (OpenSSL 3.0.19), create_default_context, ALPN http/1.1 as http.client sets
		// legacy_version 0303; supported_versions 0304,0303 → 13
		// SNI: example.com → d
		// ciphers (18): 1302,1303,1301,c02c,c030,c02b,c02f,cca9,cca8,c024,c028,c023,c027,009f,009e,006b,0067,00ff
		// extensions (12): 0000,000b,000a,0023,0010,0016,0017,000d,002b,002d,0033,0015
		// ALPN: http/1.1 → h1
		// signature_algorithms: opensslSigs
		// (b and c are those of the "Python" t13d181000_85036bcba153_d41ae481755e in FoxIO's
		// ja4plus-mapping.csv, above.)
		{"python",
			"t13d1812h1_0067,006b,009e,009f,00ff,1301,1302,1303,c023,c024,c027,c028,c02b,c02c,c02f,c030,cca8,cca9_000a,000b,000d,0015,0016,0017,0023,002b,002d,0033_" + opensslSigs,
			"t13d1812h1_85036bcba153_d41ae481755e"},
		// Go 1.26's crypto/tls client, ServerName example.com, no NextProtos
		// legacy_version 0303; supported_versions 0304,0303 → 13
		// SNI: example.com → d
		// ciphers (13): c02b,c02f,c02c,c030,cca9,cca8,c009,c013,c00a,c014,1301,1302,1303
		// extensions (11): 0000,000b,ff01,0017,0012,0005,000a,000d,0032,002b,0033
		// ALPN: none → 00
		// signature_algorithms: goSigs
		{"go-tls",
			"t13d131100_" + goCiphers + "_0005,000a,000b,000d,0012,0017,002b,0032,0033,ff01_" + goSigs,
			"t13d131100_f57a46bbacb6_ab7e3b40a677"},
		// Go 1.26's net/http client (http.DefaultTransport), GET https://example.com/
		// as go-tls, and extension 0010 (ALPN h2,http/1.1 → h2) between 0032 and 002b: 12 extensions
		{"go-http",
			"t13d1312h2_" + goCiphers + "_0005,000a,000b,000d,0012,0017,002b,0032,0033,ff01_" + goSigs,
			"t13d1312h2_f57a46bbacb6_ab7e3b40a677"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			checkWant(t, tt.raw, tt.fp)
			info := serverHello(t, readRecorded(t, tt.file))
			if info == nil {
				t.Fatal("tls.Server did not reach GetConfigForClient")
			}
			checkHello(t, FromClientHello(info, TCP), tt.raw, tt.fp)
		})
	}
}

// TestCraftedHellos feeds hand-built ClientHellos to a real tls.Server, for
// what crypto/tls does with GREASE, empty lists, counts over 99, TLS 1.2
// clients and odd versions.
func TestCraftedHellos(t *testing.T) {
	// The hello of the specification's example, as a Chrome sends it:
	// GREASE in cipher suites, extensions, groups, key shares and versions.
	chrome := clientHello(0x0303,
		list(0x0a0a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035),
		[]ext{
			{0x1a1a, nil},
			{0x0000, sni("example.com")},
			{0x0017, nil},
			{0xff01, []byte{0}},
			{0x000a, u16list(0x2a2a, 0x001d, 0x0017, 0x0018)},
			{0x000b, []byte{1, 0}},
			{0x0023, nil},
			{0x0010, alpn("h2", "http/1.1")},
			{0x0005, []byte{1, 0, 0, 0, 0}},
			{0x000d, u16list(0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601)},
			{0x0012, nil},
			{0x0033, keyShares()},
			{0x002d, []byte{1, 1}},
			{0x002b, u8list(0x3a3a, 0x0304, 0x0303)},
			{0x001b, []byte{2, 0, 2}},
			{0x4469, []byte{0, 3, 2, 'h', '2'}},
			{0x4a4a, []byte{0}},
			{0x0015, make([]byte, 32)},
		})
	many := make([]uint16, 0, 121) // a GREASE value and 0001 to 0078
	many = append(many, 0x5a5a)
	var manyText []string
	for v := uint16(1); v <= 120; v++ {
		many = append(many, v)
		manyText = append(manyText, fmt.Sprintf("%04x", v))
	}
	var manyExts []ext // 7000 to 7068, unknown to crypto/tls
	var manyExtsText []string
	for v := uint16(0x7000); v <= 0x7068; v++ {
		manyExts = append(manyExts, ext{v, nil})
		manyExtsText = append(manyExtsText, fmt.Sprintf("%04x", v))
	}

	tests := []struct {
		name    string
		hello   []byte
		raw, fp string
	}{
		// supported_versions 3a3a,0304,0303 → 13 (GREASE ignored); SNI → d
		// ciphers: 0a0a and the example's 15 → 15
		// extensions: 1a1a, 4a4a and the example's 16 → 16
		// ALPN h2,http/1.1 → h2; signature_algorithms 0403,0804,0401,0503,0805,0501,0806,0601
		// The specification's example, JA4_r and JA4 as it publishes them.
		{"grease", records(chrome, 0),
			"t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601",
			"t13d1516h2_8daaf6152771_e5627efa2ab1"},
		// the same hello in two TLS records
		{"grease, two records", records(chrome, 100),
			"t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601",
			"t13d1516h2_8daaf6152771_e5627efa2ab1"},
		// TLS 1.2 only: legacy_version 0303, no supported_versions → 12; SNI → d
		// ciphers c02f,c030,009c → 03; extensions 0000,000a,000b,000d,0010 → 05
		// ALPN http/1.1 → h1; signature_algorithms 0401,0501
		{"tls 1.2 only", records(clientHello(0x0303, list(0xc02f, 0xc030, 0x009c), []ext{
			{0x0000, sni("example.com")},
			{0x000a, u16list(0x0017)},
			{0x000b, []byte{1, 0}},
			{0x000d, u16list(0x0401, 0x0501)},
			{0x0010, alpn("http/1.1")},
		}), 0),
			"t12d0305h1_009c,c02f,c030_000a,000b,000d_0401,0501",
			"t12d0305h1_13bac7b83268_637ee6fc4330"},
		// legacy_version 0303 → 12; no SNI → i; ciphers 5a5a, 0001 to 0078 → 120 → 99
		// no extensions → 00, ALPN 00, c empty → 000000000000
		{"over 99 cipher suites", records(clientHello(0x0303, many, nil), 0),
			"t12i990000_" + strings.Join(manyText, ",") + "_",
			"t12i990000_0f8860b09f90_000000000000"},
		// legacy_version 0303 → 12; no SNI → i; cipher 002f → 01
		// extensions 7000 to 7068 → 105 → 99; no signature_algorithms
		{"over 99 extensions", records(clientHello(0x0303, list(0x002f), manyExts), 0),
			"t12i019900_002f_" + strings.Join(manyExtsText, ","),
			"t12i019900_ba72b8082249_ea76d7e742bc"},
		// legacy_version 0303 → 12; cipher 002f; extension 0010 only → 01
		// ALPN ab cd,h2: the first value's bytes are not alphanumeric → hex ab cd → ad
		// c: nothing but ALPN → empty → 000000000000
		{"non-alphanumeric ALPN", records(clientHello(0x0303, list(0x002f), []ext{{0x0010, alpn("\xab\xcd", "h2")}}), 0),
			"t12i0101ad_002f_",
			"t12i0101ad_ba72b8082249_000000000000"},
		// legacy_version 0303 → 12; no cipher suites, no extensions block at all
		{"no cipher suites or extensions", records(clientHello(0x0303, nil, nil), 0),
			"t12i000000__",
			"t12i000000_000000000000_000000000000"},
		// an SNI extension naming no host_name (type 1): the extension is there → d
		{"SNI extension without a host name", records(clientHello(0x0303, list(0x002f), []ext{
			{0x0000, []byte{0, 4, 1, 0, 1, 'x'}},
		}), 0),
			"t12d010100_002f_",
			"t12d010100_ba72b8082249_000000000000"},
		// supported_versions 2a2a: no version but GREASE → 00
		{"supported_versions only GREASE", records(clientHello(0x0303, list(0x002f), []ext{
			{0x002b, u8list(0x2a2a)},
		}), 0),
			"t00i010100_002f_002b",
			"t00i010100_ba72b8082249_b9a491fefe05"},
		// signature_algorithms 0a0a,0804: GREASE left out of c too
		{"GREASE signature algorithm", records(clientHello(0x0303, list(0x002f), []ext{
			{0x0017, nil},
			{0xff01, []byte{0}},
			{0x000d, u16list(0x0a0a, 0x0804)},
		}), 0),
			"t12i010300_002f_000d,0017,ff01_0804",
			"t12i010300_ba72b8082249_33ec4610f97a"},
		// legacy_version 0300 (SSL 3.0), no supported_versions: the
		// specification says s3, but crypto/tls reports no version below
		// TLS 1.0 (see FromClientHello) → 00
		{"SSL 3.0, unknown to crypto/tls", records(clientHello(0x0300, list(0x002f), nil), 0),
			"t00i010000_002f_",
			"t00i010000_ba72b8082249_000000000000"},
		// legacy_version 0305, no supported_versions: the specification says
		// 00, but crypto/tls reports the versions it knows up to it → 13
		{"legacy_version above TLS 1.3", records(clientHello(0x0305, list(0x002f), nil), 0),
			"t13i010000_002f_",
			"t13i010000_ba72b8082249_000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkWant(t, tt.raw, tt.fp)
			info := serverHello(t, tt.hello)
			if info == nil {
				t.Fatal("tls.Server did not reach GetConfigForClient")
			}
			checkHello(t, FromClientHello(info, TCP), tt.raw, tt.fp)
		})
	}
}

// TestHello covers FoxIO's own published examples, other transports, and
// what no recorded or crafted hello shows.
func TestHello(t *testing.T) {
	tests := []struct {
		name    string
		hello   Hello
		raw, fp string
	}{
		// The specification's example, in the original order it gives; JA4_r
		// and JA4 as it publishes them: https://github.com/FoxIO-LLC/ja4/blob/main/technical_details/JA4.md
		{"specification's example", Hello{
			SupportedVersions: list(0x0304, 0x0303),
			CipherSuites:      list(0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035),
			Extensions:        list(0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015),
			ALPN:              []string{"h2", "http/1.1"},
			SignatureSchemes:  sigs(0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601),
		},
			"t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601",
			"t13d1516h2_8daaf6152771_e5627efa2ab1"},
		// Firefox in FoxIO's test data: the lists of its JA4_ro, its JA4_r and JA4,
		// https://github.com/FoxIO-LLC/ja4/blob/main/python/test/testdata/tls12.pcap.json
		{"FoxIO's Firefox", Hello{
			SupportedVersions: list(0x0304, 0x0303),
			CipherSuites:      list(0x1301, 0x1303, 0x1302, 0xc02b, 0xc02f, 0xcca9, 0xcca8, 0xc02c, 0xc030, 0xc00a, 0xc009, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035),
			Extensions:        list(0x0000, 0x0017, 0xff01, 0x000a, 0x000b, 0x0023, 0x0010, 0x0005, 0x0022, 0x0033, 0x002b, 0x000d, 0x002d, 0x001c, 0x0015),
			ALPN:              []string{"h2", "http/1.1"},
			SignatureSchemes:  sigs(0x0403, 0x0503, 0x0603, 0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0601, 0x0203, 0x0201),
		},
			"t13d1715h2_002f,0035,009c,009d,1301,1302,1303,c009,c00a,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0015,0017,001c,0022,0023,002b,002d,0033,ff01_0403,0503,0603,0804,0805,0806,0401,0501,0601,0203,0201",
			"t13d1715h2_5b57614c22b0_3d5424432f57"},
		// A TLS 1.2 client (no supported_versions) in FoxIO's test data, whose
		// signature algorithms efef, eeee, eded only look like GREASE,
		// https://github.com/FoxIO-LLC/ja4/blob/main/python/test/testdata/tls-alpn-h2.pcap.json
		{"FoxIO's TLS 1.2 client", Hello{
			Version:          0x0303,
			CipherSuites:     list(0xc030, 0xc02c, 0xc028, 0xc024, 0xc014, 0xc00a, 0x009f, 0x006b, 0x0039, 0xcca9, 0xcca8, 0xccaa, 0xff85, 0x00c4, 0x0088, 0x0081, 0x009d, 0x003d, 0x0035, 0x00c0, 0x0084, 0xc02f, 0xc02b, 0xc027, 0xc023, 0xc013, 0xc009, 0x009e, 0x0067, 0x0033, 0x00be, 0x0045, 0x009c, 0x003c, 0x002f, 0x00ba, 0x0041, 0xc011, 0xc007, 0x0005, 0x0004, 0xc012, 0xc008, 0x0016, 0x000a, 0x00ff),
			Extensions:       list(0x0000, 0x000b, 0x000a, 0x000d, 0x0010),
			ALPN:             []string{"h2", "http/1.1"},
			SignatureSchemes: sigs(0x0601, 0x0603, 0xefef, 0x0501, 0x0503, 0x0401, 0x0403, 0xeeee, 0xeded, 0x0301, 0x0303, 0x0201, 0x0203),
		},
			"t12d4605h2_0004,0005,000a,0016,002f,0033,0035,0039,003c,003d,0041,0045,0067,006b,0081,0084,0088,009c,009d,009e,009f,00ba,00be,00c0,00c4,00ff,c007,c008,c009,c00a,c011,c012,c013,c014,c023,c024,c027,c028,c02b,c02c,c02f,c030,cca8,cca9,ccaa,ff85_000a,000b,000d_0601,0603,efef,0501,0503,0401,0403,eeee,eded,0301,0303,0201,0203",
			"t12d4605h2_85626a9a5f7f_aaf95bb78ec9"},
		// nothing at all: version 0000 → 00, no SNI, no lists
		{"zero Hello", Hello{}, "t00i000000__", "t00i000000_000000000000_000000000000"},
		// QUIC: q; supported_versions 0304 → 13; extensions 002b,0039; ALPN h3
		{"QUIC", Hello{
			Protocol:          QUIC,
			SupportedVersions: list(0x0304),
			Extensions:        list(0x002b, 0x0039),
			ALPN:              []string{"h3"},
		}, "q13i0002h3__002b,0039", "q13i0002h3_000000000000_c8abead0ac40"},
		// DTLS 1.2 without supported_versions: legacy_version fefd → d2
		{"DTLS 1.2", Hello{
			Protocol:     DTLS,
			Version:      0xfefd,
			CipherSuites: list(0xc02b),
			Extensions:   list(0x0017),
		}, "dd2i010100_c02b_0017", "dd2i010100_648b5c445417_1ca028f07214"},
		// DTLS, supported_versions fefc (1.3), fefd (1.2): the numerically
		// highest, fefd → d2, as FoxIO's tools compare
		{"DTLS supported_versions", Hello{
			Protocol:          DTLS,
			Version:           0xfefd,
			SupportedVersions: list(0xfefc, 0xfefd),
			CipherSuites:      list(0xc02b),
			Extensions:        list(0x0017),
		}, "dd2i010100_c02b_0017", "dd2i010100_648b5c445417_1ca028f07214"},
		// DTLS 1.3 alone → d3; DTLS 1.0 legacy → d1 (below)
		{"DTLS 1.3", Hello{Protocol: DTLS, SupportedVersions: list(0xfefc)}, "dd3i000000__", "dd3i000000_000000000000_000000000000"},
		{"DTLS 1.0", Hello{Protocol: DTLS, Version: 0xfeff}, "dd1i000000__", "dd1i000000_000000000000_000000000000"},
		// SSL 3.0 and SSL 2.0 legacy versions, reachable when a Hello is filled directly
		{"SSL 3.0", Hello{Version: 0x0300}, "ts3i000000__", "ts3i000000_000000000000_000000000000"},
		{"SSL 2.0", Hello{Version: 0x0002}, "ts2i000000__", "ts2i000000_000000000000_000000000000"},
		{"TLS 1.1", Hello{Version: 0x0302}, "t11i000000__", "t11i000000_000000000000_000000000000"},
		{"TLS 1.0", Hello{Version: 0x0301}, "t10i000000__", "t10i000000_000000000000_000000000000"},
		// only SNI and ALPN: counted (02) in a, left out of c, which is empty
		{"only SNI and ALPN", Hello{
			SupportedVersions: list(0x0304),
			CipherSuites:      list(0x1301),
			Extensions:        list(0x0000, 0x0010),
			ALPN:              []string{"h2"},
		}, "t13d0102h2_1301_", "t13d0102h2_" + hash12Of("1301") + "_000000000000"},
		// a GREASE cipher suite alone: count 00, b empty
		{"only a GREASE cipher suite", Hello{Version: 0x0303, CipherSuites: list(0xfafa)},
			"t12i000000__", "t12i000000_000000000000_000000000000"},
		// the renegotiation SCSV and the fallback SCSV are counted and listed
		{"SCSVs", Hello{Version: 0x0303, CipherSuites: list(0x5600, 0x00ff)},
			"t12i020000_00ff,5600_", "t12i020000_" + hash12Of("00ff,5600") + "_000000000000"},
		// an empty first ALPN value → 00 (crypto/tls refuses one; a Hello may hold it)
		{"empty ALPN value", Hello{Version: 0x0303, ALPN: []string{"", "h2"}},
			"t12i000000__", "t12i000000_000000000000_000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkWant(t, tt.raw, tt.fp)
			checkHello(t, tt.hello, tt.raw, tt.fp)
		})
	}
}

// TestALPN checks the ALPN characters against the specification's
// examples and rules.
func TestALPN(t *testing.T) {
	tests := []struct {
		alpn []string
		want string
	}{
		{nil, "00"},
		{[]string{}, "00"},
		{[]string{""}, "00"},
		{[]string{"h2", "http/1.1"}, "h2"},
		{[]string{"http/1.1", "h2"}, "h1"},
		{[]string{"h3"}, "h3"},
		{[]string{"a"}, "aa"}, // one character is first and last
		{[]string{"Z9"}, "Z9"},
		// the specification's examples of bytes that are not alphanumeric
		{[]string{"\xab"}, "ab"},
		{[]string{"\x20"}, "20"},
		{[]string{"\xab\xcd"}, "ad"},
		{[]string{"\x20\x61"}, "21"},
		{[]string{"\x30\xab"}, "3b"},
		{[]string{"\x61\x20"}, "60"},
		{[]string{"\x30\x31\xab\xcd"}, "3d"},
		{[]string{"\x30\xab\xcd\x31"}, "01"},
		// both ends alphanumeric: the middle does not matter
		{[]string{"h\x00\xff2"}, "h2"},
	}
	for _, tt := range tests {
		if got := string(appendALPN(nil, tt.alpn)); got != tt.want {
			t.Errorf("ALPN %q: got %q, want %q", tt.alpn, got, tt.want)
		}
	}
}

// TestIsGREASE checks isGREASE against RFC 8701's list of the 16 values.
func TestIsGREASE(t *testing.T) {
	grease := map[uint16]bool{}
	for _, v := range []uint16{0x0a0a, 0x1a1a, 0x2a2a, 0x3a3a, 0x4a4a, 0x5a5a, 0x6a6a, 0x7a7a,
		0x8a8a, 0x9a9a, 0xaaaa, 0xbaba, 0xcaca, 0xdada, 0xeaea, 0xfafa} {
		grease[v] = true
	}
	for v := range 1 << 16 {
		if got := isGREASE(uint16(v)); got != grease[uint16(v)] {
			t.Errorf("isGREASE(%#04x): got %v, want %v", v, got, grease[uint16(v)])
		}
	}
}

// TestAllocations holds the cost contract: AppendFingerprint allocates
// nothing into a large enough buffer, Fingerprint only its string.
func TestAllocations(t *testing.T) {
	h := FromClientHello(serverHello(t, readRecorded(t, "go-http")), TCP)
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = h.AppendFingerprint(buf[:0]) }); n != 0 {
		t.Errorf("AppendFingerprint: got %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = h.Fingerprint() }); n != 1 {
		t.Errorf("Fingerprint: got %v allocations, want 1", n)
	}
}

// BenchmarkFingerprint measures a fingerprint of net/http's hello, as the
// listener would take it on every handshake.
func BenchmarkFingerprint(b *testing.B) {
	info := serverHello(b, readRecorded(b, "go-http"))
	b.Run("Fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = FromClientHello(info, TCP).Fingerprint()
		}
	})
	b.Run("AppendFingerprint", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			buf = FromClientHello(info, TCP).AppendFingerprint(buf[:0])
		}
	})
}

var fingerprintShape = regexp.MustCompile(`^[tqd](13|12|11|10|s3|s2|d1|d2|d3|00)[di]\d\d\d\d[0-9A-Za-z]{2}_[0-9a-f]{12}_[0-9a-f]{12}$`)

// FuzzFingerprint feeds arbitrary bytes to a tls.Server as a ClientHello;
// whatever it reports to GetConfigForClient must fingerprint to the right
// shape, and to the hashes of its own raw form.
func FuzzFingerprint(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.hello"))
	for _, file := range files {
		f.Add(readRecorded(f, strings.TrimSuffix(filepath.Base(file), ".hello")))
	}
	f.Add(records(clientHello(0x0303, list(0x002f), []ext{{0x0010, alpn("\xab\xcd")}}), 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		info := serverHello(t, data)
		if info == nil {
			return
		}
		h := FromClientHello(info, TCP)
		fp := h.Fingerprint()
		if !fingerprintShape.MatchString(fp) {
			t.Fatalf("fingerprint %q: not of JA4's shape", fp)
		}
		if got := string(h.AppendFingerprint([]byte("x"))); got != "x"+fp {
			t.Fatalf("AppendFingerprint: got %q, want %q", got, "x"+fp)
		}
		if got := hashRaw(h.Raw()); got != fp {
			t.Fatalf("raw %q hashes to %q, want %q", h.Raw(), got, fp)
		}
	})
}

// checkHello compares h's fingerprints with the wanted ones.
func checkHello(t *testing.T, h Hello, raw, fp string) {
	t.Helper()
	if got := h.Raw(); got != raw {
		t.Errorf("Raw:\ngot  %s\nwant %s", got, raw)
	}
	if got := h.Fingerprint(); got != fp {
		t.Errorf("Fingerprint: got %s, want %s", got, fp)
	}
}

// checkWant checks a table's own consistency: that fp is raw with its
// lists hashed.
func checkWant(t *testing.T, raw, fp string) {
	t.Helper()
	if got := hashRaw(raw); got != fp {
		t.Fatalf("table: raw %s hashes to %s, but the table says %s", raw, got, fp)
	}
}

// hashRaw turns a ja4_r into its ja4: part a as it is, part b (up to the
// next '_') and part c (the rest) hashed.
func hashRaw(raw string) string {
	a, rest, _ := strings.Cut(raw, "_")
	b, c, _ := strings.Cut(rest, "_")
	return a + "_" + hash12Of(b) + "_" + hash12Of(c)
}

func hash12Of(s string) string {
	if s == "" {
		return "000000000000"
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

// serverHello writes records to a tls.Server over net.Pipe and returns what
// the server reported to GetConfigForClient, or nil if it never got there.
func serverHello(tb testing.TB, records []byte) *tls.ClientHelloInfo {
	tb.Helper()
	client, server := net.Pipe()
	deadline := time.Now().Add(5 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	wrote, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(wrote)
		client.Write(records) // fails if the server stops reading first
		client.Close()        // the server reads EOF if it wants more
	}()
	go func() {
		defer close(drained)
		io.Copy(io.Discard, client) // the server's alerts; ends when either side closes
	}()
	var info *tls.ClientHelloInfo
	errStop := errors.New("stop: fingerprint taken")
	conn := tls.Server(server, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		info = h
		return nil, errStop
	}})
	err := conn.Handshake()
	server.Close() // unblocks the writer and the drain
	<-wrote
	<-drained
	if info != nil && !errors.Is(err, errStop) {
		tb.Fatalf("handshake: %v, want the callback's error", err)
	}
	return info
}

// readRecorded returns the records of testdata/<name>.hello.
func readRecorded(tb testing.TB, name string) []byte {
	tb.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", name+".hello"))
	if err != nil {
		tb.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return b
}

// An ext is one extension of a crafted ClientHello.
type ext struct {
	id   uint16
	data []byte
}

// clientHello returns a ClientHello handshake message: legacy_version vers,
// a zero random, no session ID, the cipher suites, the null compression
// method, and the extensions (no extensions block when exts is nil).
func clientHello(vers uint16, ciphers []uint16, exts []ext) []byte {
	body := binary.BigEndian.AppendUint16(nil, vers)
	body = append(body, make([]byte, 32)...)
	body = append(body, 0)
	body = append(body, u16list(ciphers...)...)
	body = append(body, 1, 0)
	if exts != nil {
		var e []byte
		for _, x := range exts {
			e = binary.BigEndian.AppendUint16(e, x.id)
			e = binary.BigEndian.AppendUint16(e, uint16(len(x.data)))
			e = append(e, x.data...)
		}
		body = binary.BigEndian.AppendUint16(body, uint16(len(e)))
		body = append(body, e...)
	}
	n := len(body)
	return append([]byte{1, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// records wraps msg in TLS handshake records, split after the first
// split bytes (none when 0).
func records(msg []byte, split int) []byte {
	var out []byte
	for _, part := range [][]byte{msg[:split], msg[split:]} {
		if len(part) == 0 {
			continue
		}
		out = append(out, 22, 3, 1, byte(len(part)>>8), byte(len(part)))
		out = append(out, part...)
	}
	return out
}

func list(vs ...uint16) []uint16 { return vs }

func sigs(vs ...uint16) []tls.SignatureScheme {
	out := make([]tls.SignatureScheme, len(vs))
	for i, v := range vs {
		out[i] = tls.SignatureScheme(v)
	}
	return out
}

// u16list encodes vs with a 2-byte length, u8list with a 1-byte one.
func u16list(vs ...uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(2*len(vs)))
	for _, v := range vs {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

func u8list(vs ...uint16) []byte {
	return u16list(vs...)[1:]
}

func sni(name string) []byte {
	entry := append([]byte{0, byte(len(name) >> 8), byte(len(name))}, name...)
	return append([]byte{byte(len(entry) >> 8), byte(len(entry))}, entry...)
}

func alpn(protos ...string) []byte {
	var l []byte
	for _, p := range protos {
		l = append(append(l, byte(len(p))), p...)
	}
	return append([]byte{byte(len(l) >> 8), byte(len(l))}, l...)
}

// keyShares is a key_share extension: a GREASE share and an X25519 one.
func keyShares() []byte {
	shares := []byte{0x2a, 0x2a, 0, 1, 0, 0x00, 0x1d, 0, 32}
	shares = append(shares, bytes.Repeat([]byte{9}, 32)...)
	return append([]byte{byte(len(shares) >> 8), byte(len(shares))}, shares...)
}
