module github.com/edgerate/edge

go 1.26

require github.com/dunglas/httpsfv v1.1.2 // indirect
