package main

import (
	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
)

// streamOptions reads measure's stream flags; their combinations are
// checked by measure.Config.Validate.
func streamOptions(c *cli.Context) (measure.StreamOptions, error) {
	o := measure.StreamOptions{N: c.Int(measure.FlagStreams), Protocol: c.String(measure.FlagStreamProtocol)}
	var err error
	if o.Drain, err = probe.ParseStreamDrain(c.String(measure.FlagStreamDrain)); err != nil {
		return o, err
	}
	if o.Reconnect, err = load.ParseReconnect(c.String(measure.FlagReconnect)); err != nil {
		return o, err
	}
	return o, nil
}
