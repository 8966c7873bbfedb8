"""What several test modules share: waiting, raw clients, queues, and the programs tests start as processes."""
