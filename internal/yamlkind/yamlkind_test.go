package yamlkind

import (
	"testing"

	"go.yaml.in/yaml/v4"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"[1, 2]", "a list"},
		{"{a: 1}", "a mapping"},
		{"~", "null"},
		{"12", "a number"},
		{"1.5", "a number"},
		{"true", "true or false"},
		{"hello", "a string"},
		{`"12"`, "a string"},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.doc), &doc); err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if got := Of(doc.Content[0]); got != tc.want {
			t.Errorf("Of(%s) = %q, want %q", tc.doc, got, tc.want)
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: &x 1\nb: *x\n"), &doc); err != nil {
		t.Fatal(err)
	}
	if got := Of(doc.Content[0].Content[3]); got != "an alias" {
		t.Errorf("Of(*x) = %q, want an alias", got)
	}
}
