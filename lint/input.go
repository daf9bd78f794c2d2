package lint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is one manifest, from a file or the cluster, as a JSON-shaped map
// plus where it came from.
type Object struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Raw is the object as JSON would decode it.
	Raw map[string]any
	// File is the path it was read from; "" for a live object.
	File string
	// Node is the object's YAML node, for line and column; nil when
	// unknown (live objects, generated kustomize output).
	Node *yaml.Node
}

// Ref names the object: Kind namespace/name.
func (o *Object) Ref() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// InputError is input that cannot be read: a file, and the line when the
// YAML parser gives one.
type InputError struct {
	File string
	Line int
	Err  error
}

func (e *InputError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// ParseYAML reads a multi-document YAML stream; name is the file name used
// in locations and errors ("-" for standard input). Documents without a kind
// (empty ones, comments) are skipped; a List's items are objects of their
// own.
func ParseYAML(name string, r io.Reader) ([]*Object, error) {
	dec := yaml.NewDecoder(r)
	var out []*Object
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			ie := &InputError{File: name, Err: err}
			if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
				ie.Line, _ = strconv.Atoi(m[1])
				ie.Err = errors.New(m[2])
			}
			return nil, ie
		}
		if len(doc.Content) == 0 {
			continue
		}
		objs, err := objectsFromNode(name, doc.Content[0])
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
}

func objectsFromNode(name string, n *yaml.Node) ([]*Object, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, &InputError{File: name, Line: n.Line, Err: fmt.Errorf("want a Kubernetes object (a mapping), got a %s", nodeKind(n))}
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return nil, &InputError{File: name, Line: n.Line, Err: err}
	}
	// A YAML map can have non-string keys and values JSON cannot carry;
	// a round trip through JSON makes it the shape every decoder expects.
	raw, err := jsonShape(m)
	if err != nil {
		return nil, &InputError{File: name, Line: n.Line, Err: err}
	}
	kind, _ := raw["kind"].(string)
	if kind == "" {
		return nil, nil
	}
	if kind == "List" || (len(kind) > 4 && kind[len(kind)-4:] == "List" && raw["items"] != nil) {
		items := child(n, "items")
		if items == nil || items.Kind != yaml.SequenceNode {
			return nil, nil
		}
		var out []*Object
		for _, it := range items.Content {
			objs, err := objectsFromNode(name, it)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	o := newObject(raw)
	o.File, o.Node = name, n
	return []*Object{o}, nil
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	}
	return "document"
}

func jsonShape(m map[string]any) (map[string]any, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func newObject(raw map[string]any) *Object {
	o := &Object{Raw: raw}
	o.APIVersion, _ = raw["apiVersion"].(string)
	o.Kind, _ = raw["kind"].(string)
	if md, ok := raw["metadata"].(map[string]any); ok {
		o.Namespace, _ = md["namespace"].(string)
		o.Name, _ = md["name"].(string)
	}
	return o
}

// LiveObject wraps an object read from the API server (a typed object or an
// unstructured one); kind and apiVersion are given because list items lack
// them.
func LiveObject(apiVersion, kind string, obj any) (*Object, error) {
	var raw map[string]any
	switch v := obj.(type) {
	case map[string]any:
		raw = v
	default:
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("convert %s: %w", kind, err)
		}
		if raw, err = jsonShape(m); err != nil {
			return nil, err
		}
	}
	raw["apiVersion"], raw["kind"] = apiVersion, kind
	return newObject(raw), nil
}

// decodeInto decodes the JSON-shaped value v into a typed struct.
func decodeInto(v any, into any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// child is a mapping node's value under key, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Position is a 1-based line and column; 0 when unknown.
type Position struct {
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
}

// Locate finds the deepest node along path (map keys as strings, list
// indexes as ints) and returns its position: a map entry's key, a list
// item. Where the path leaves the YAML (a field the manifest leaves to its
// default), the last node that exists is the answer.
func Locate(n *yaml.Node, path []any) Position {
	if n == nil {
		return Position{}
	}
	pos := Position{n.Line, n.Column}
	cur := n
	for _, seg := range path {
		switch s := seg.(type) {
		case string:
			if cur.Kind != yaml.MappingNode {
				return pos
			}
			found := false
			for i := 0; i+1 < len(cur.Content); i += 2 {
				if cur.Content[i].Value == s {
					pos = Position{cur.Content[i].Line, cur.Content[i].Column}
					cur = cur.Content[i+1]
					found = true
					break
				}
			}
			if !found {
				return pos
			}
		case int:
			if cur.Kind != yaml.SequenceNode || s >= len(cur.Content) {
				return pos
			}
			cur = cur.Content[s]
			pos = Position{cur.Line, cur.Column}
		}
	}
	return pos
}
