"""Tests of streamq/dashboard: pages, actions and the browser."""
