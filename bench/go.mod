module github.com/edgerate/edge/bench

go 1.26.0

replace github.com/edgerate/edge => ../

require (
	github.com/edgerate/edge v0.0.0-00010101000000-000000000000
	github.com/go-chi/httprate v0.16.1
	golang.org/x/time v0.16.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
