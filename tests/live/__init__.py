"""Tests of the live-update layer: relay, consumers, reconnect."""
