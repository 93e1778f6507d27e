package acme

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"time"

	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that writes certmagic's zap logs to a
// slog.Handler, at their own levels, with their fields as attributes and
// the logger's name (certmagic's "obtain", "maintenance"...) as logger.
// certmagic never logs an account's or a certificate's private key; the
// fields it logs are names, URLs, times and errors.
type slogCore struct {
	h     slog.Handler
	attrs []slog.Attr // the fields of With
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h, attrs: append(c.attrs[:len(c.attrs):len(c.attrs)], attrs(fields)...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	r.AddAttrs(slog.String("logger", e.LoggerName))
	r.AddAttrs(c.attrs...)
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (slogCore) Sync() error { return nil }

// slogLevel maps zap's levels to slog's; those above error are errors.
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// attrs turns zap fields into slog attributes, through zap's own encoder
// of a field into a value.
func attrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	out := make([]slog.Attr, 0, len(fields))
	for _, f := range fields {
		v, ok := enc.Fields[f.Key]
		if !ok {
			continue
		}
		out = append(out, slog.Any(f.Key, value(v)))
	}
	return out
}

// value makes what zap's map encoder holds readable by slog's handlers: a
// duration as its text form is slog's own duration, a float that is not a
// number as its text.
func value(v any) any {
	switch x := v.(type) {
	case time.Duration:
		return x
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64) // JSON has no such number
		}
	}
	return v
}
