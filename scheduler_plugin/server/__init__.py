"""The `loadline scheduler` process: informers feeding the snapshot, the scheduling loop, binding
through the API server, events and conditions, leader election, and the HTTP port."""
