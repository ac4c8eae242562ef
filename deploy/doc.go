// Package deploy holds Spillway's deployment kit, and the tests that keep
// it true to the binary; it has no code of its own.
//
//	Dockerfile             static binary on distroless, non-root
//	docker-compose.yml     three nodes, Prometheus, Grafana and the bench on one host
//	kubernetes/            StatefulSet, headless and client Services, PodDisruptionBudget
//	systemd/               a sandboxed unit and the config file it reads
//	grafana/spillway.json  a dashboard over the nodes' /metrics
//	prometheus/            the compose cluster's scrape configuration
//
// The tests build the binary as the Dockerfile's build stage does and
// check it is static; parse every YAML file; run the binary's
// --print-config on the settings of each manifest (flags, SPILLWAY_*
// variables, config file), so that a renamed flag fails here; check
// memory limits against -m and the stated overhead, and grace periods
// against --shutdown-timeout and --drain; run systemd-analyze on the
// unit; and start a three-node cluster of that binary that promtool
// checks and a real Prometheus scrapes, against which every query of the
// dashboard must return data. README "Operations" says how to use it.
package deploy
