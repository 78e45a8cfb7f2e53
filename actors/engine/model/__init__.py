"""The data the engine computes on, owned by it so that every arrow runs one way (engine <- services
<- jobs and transports): trajectories of decision points (:mod:`.trajectories`) and the experience
templates learned from them (:mod:`.templates`)."""
