"""Simulation of one training step: schedule, SimPy engine, analytic estimate."""
