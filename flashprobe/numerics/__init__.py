"""Floating-point helpers shared by the emulator, the bias experiment and the tests."""
