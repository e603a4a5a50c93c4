module github.com/autoshape/autoshape

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/florianl/go-tc v0.4.8
	github.com/google/go-cmp v0.7.0
	github.com/mdlayher/netlink v1.11.2
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.46.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/socket v0.6.0 // indirect
	github.com/prometheus-community/pro-bing v0.9.1 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sync v0.21.0 // indirect
)
