module github.com/epwindow/epwindow

go 1.26.0

require github.com/urfave/cli/v2 v2.27.7

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/guptarohit/asciigraph v0.10.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
	k8s.io/utils v0.0.0-20261023123148-ca04ba58ecab // indirect
)
