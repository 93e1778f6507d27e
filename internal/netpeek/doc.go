// Package netpeek tells whether a connection has something waiting to be
// read, without reading it or waiting.
package netpeek
