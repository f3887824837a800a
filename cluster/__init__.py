"""Work past one machine on Ray: the connection, and the jobs that run as Ray tasks and actors."""
