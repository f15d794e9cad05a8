"""provision: bring a delivery of bare-metal GPU servers to a healthy, admitted cluster."""

__version__ = "0.1.0"
