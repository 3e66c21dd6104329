"""The login-node controller and the monitor job that share the run directory."""
